import { type BrokerConnection, BrokerUnavailableError } from '../broker/index.js';
import { appendCheckpoint, isCheckpoint, offsetOf } from './entries.js';

/**
 * Appends checkpoint `id` and reads where it landed, from a reader attached at the stream's end:
 * the offset the stream is at now. A reader that resumes at a higher offset is reading a stream
 * deleted and declared again (its offsets started over).
 */
export async function landCheckpoint(broker: BrokerConnection, stream: string, id: string, timeoutMs: number): Promise<number> {
  let found!: (offset: number) => void;
  let failed!: (err: Error) => void;
  const landed = new Promise<number>((resolve, reject) => {
    found = resolve;
    failed = reject;
  });
  landed.catch(() => {}); // settled before it is awaited when the append fails
  const reader = await broker.openReader(stream, {
    prefetch: 100,
    arguments: { 'x-stream-offset': 'next' },
    onMessage: (message) => {
      if (!message) return failed(new BrokerUnavailableError(`the broker cancelled the probe of ${stream}`));
      const offset = offsetOf(message.properties.headers);
      if (offset !== undefined && isCheckpoint(message.properties.headers, id)) found(offset);
    },
    onClose: () => failed(new BrokerUnavailableError(`channel closed while probing ${stream}`)),
  });
  const timer = setTimeout(() => failed(new BrokerUnavailableError(`checkpoint not read back from ${stream} within ${timeoutMs} ms`)), timeoutMs);
  try {
    await appendCheckpoint(broker, stream, id, timeoutMs);
    return await landed;
  } finally {
    clearTimeout(timer);
    await reader.close();
  }
}
