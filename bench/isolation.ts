/**
 * Scenario 4: healthy merchants' p99 while 10% of the traffic goes to a merchant whose endpoint
 * hangs, against the same traffic with that 10% going to a healthy endpoint instead.
 */
import { type Latency, steadyRun } from './steady.js';
import type { ReceiverProcess } from './processes.js';

export interface IsolationResult {
  baseline: Latency;
  withHanging: Latency;
}

export async function benchIsolation(url: string, healthy: ReceiverProcess, other: ReceiverProcess, rate: number, seconds: number): Promise<IsolationResult> {
  const merchantOf = (i: number) => (i % 10 === 0 ? 'm_other' : 'm_healthy');
  const run = (otherPath: string) =>
    steadyRun({
      url,
      rate,
      seconds,
      merchants: [
        { id: 'm_healthy', url: `${healthy.url}/ok` },
        { id: 'm_other', url: `${other.url}${otherPath}` },
      ],
      merchantOf,
      receivers: [healthy, other],
      expectDelivered: (m) => m === 'm_healthy' || otherPath === '/ok',
    });
  const baseline = (await run('/ok')).m_healthy!;
  const withHanging = (await run('/hang')).m_healthy!;
  return { baseline, withHanging };
}
