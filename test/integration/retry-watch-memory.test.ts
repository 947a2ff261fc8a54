import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { sampleEvent } from '../../libs/contracts/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { refusedUrl } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Issue 29: a merchant whose server is down while its traffic keeps coming leaves webhooks
 * waiting in the retry tiers by the hundred thousand, and every dispatcher's retry watch holds
 * each of them. The heap (with array buffers) is measured after a full collection (not RSS, which the allocator keeps
 * high), so the figure is what the watch holds: it was about 1,000 bytes per waiting webhook.
 */
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/**
 * The JavaScript heap and the array buffers outside it (where typed arrays keep their bytes),
 * after full collections: the least of a few readings, since socket reads come and go.
 */
async function heapAfterGc(): Promise<number> {
  let least = Infinity;
  for (let i = 0; i < 5; i++) {
    gc();
    const { heapUsed, arrayBuffers } = process.memoryUsage();
    least = Math.min(least, heapUsed + arrayBuffers);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return least;
}

/** Webhooks made to wait before measuring (everything the dispatcher allocates once is there by then), and then per step. */
const WARM = 10_000;
const STEP = 25_000;
const WINDOW = 5_000;

describe('retry watch memory with a dead endpoint under load', () => {
  let harness: Harness;
  const merchant = testMerchant('m_down', 'http://placeholder');

  beforeAll(async () => {
    merchant.webhook!.url = await refusedUrl();
    harness = await startHarness({
      name: 'watch-memory',
      merchants: [merchant],
      // Long tiers: every webhook stays waiting for the whole test.
      retryDelaysMs: [600_000, 600_000],
      // Past 5,000 waits of a tier, the rest wait on disk: the steps below all go there.
      retryWatch: { overdueAfterMs: 120_000, waitsInMemoryPerTier: WINDOW },
    });
  });

  afterAll(async () => {
    await harness?.close();
  });

  const waiting = () => [...harness.retryWatch!.waitingByQueue().values()].reduce((sum, n) => sum + n, 0);

  async function publishAndWait(count: number, total: number): Promise<void> {
    for (let i = 0; i < count; i += 500) {
      await Promise.all(Array.from({ length: Math.min(500, count - i) }, () => harness.publisher.publish(sampleEvent('payout', merchant.id))));
    }
    await waitFor(`${total} webhooks waiting`, () => waiting() === total, 120_000, 200);
  }

  it('keeps its memory flat while the waiting webhooks grow past its window (it held 75 bytes each, 310 to 370 before that)', async () => {
    await publishAndWait(WARM, WARM);
    const warm = await heapAfterGc();
    const warmBytes = harness.retryWatch!.memory().bytes;
    await publishAndWait(STEP, WARM + STEP);
    await publishAndWait(STEP, WARM + 2 * STEP);
    const grown = await heapAfterGc();
    const perWait = (grown - warm) / (2 * STEP);
    // The watch's own estimate of its arrays (what the metric reports) does not move at all.
    const memory = harness.retryWatch!.memory();
    process.stdout.write(`heap per added waiting webhook: ${perWait.toFixed(1)} bytes; watch estimate ${warmBytes} -> ${memory.bytes} bytes; ${memory.waitsOnDisk} of ${memory.waits} on disk (${memory.diskBytes} bytes)\n`);
    expect(memory.waits).toBe(WARM + 2 * STEP);
    expect(memory.waitsOnDisk).toBe(WARM + 2 * STEP - WINDOW);
    expect(memory.bytes).toBeLessThanOrEqual(warmBytes * 1.05);
    expect(perWait).toBeLessThan(15);
  }, 300_000);
});
