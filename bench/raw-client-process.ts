/**
 * A raw HTTP client run in a fresh process, as the dispatcher is, so neither side of the
 * comparison is warmer: argv = receiver URL, total, concurrency.
 */
import { startReceiverClient } from './raw-clients.js';

const [url, total, concurrency] = process.argv.slice(2);
const result = await startReceiverClient(url!, Number(total), Number(concurrency));
process.send?.(result);
