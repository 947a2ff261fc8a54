/**
 * A raw HTTP client run in a fresh process, as the dispatcher is, so neither side of the
 * comparison is warmer: argv = receiver URL, total, concurrency, client (undici | got).
 */
import { startReceiverClient } from './raw-clients.js';

const [url, total, concurrency, client] = process.argv.slice(2);
const result = await startReceiverClient(url!, Number(total), Number(concurrency), client === 'got' ? 'got' : 'undici');
process.send?.(result);
