/**
 * `failed replay`'s loop against a fake resend: one slow confirm, or a reconnect of the broker, costs
 * the replay that webhook at most, not the rest of the window; only a broker that stays away stops
 * it, and what it did not try is reported as not tried, not as failed.
 */
import { Writable } from 'node:stream';
import { BrokerUnavailableError } from '../../libs/broker/index.js';
import { type FailureRow, ResendOutcomeUnknownError, type ResendService, ResendStoppedError, type ResendTarget } from '../../libs/failed/index.js';
import { BROKER_FAULTS_TO_GIVE_UP, replay, report } from '../../apps/cli/replay.js';
import type { CliContext } from '../../apps/cli/command.js';

const merchant: ResendTarget = { id: 'm_1', endpoints: [{ id: 'ep_1', enabled: true,  }] };
const candidates = Array.from({ length: 5 }, (_, i) => ({ webhookId: `evt_${i + 1}`, endpointId: 'ep_1' }) as FailureRow);

function text(): Writable & { text: string } {
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      stream.text += chunk.toString();
      done();
    },
  }) as Writable & { text: string };
  stream.text = '';
  return stream;
}

/** A resend whose call n (from 1) throws `failures(n)` when it gives an error, else resends the one webhook. */
function fakeResend(failures: (call: number) => Error | undefined): { resend: ResendService; calls: string[] } {
  const calls: string[] = [];
  const resend = {
    async resendWebhook(_merchant: ResendTarget, webhookId: string) {
      calls.push(webhookId);
      const failure = failures(calls.length);
      if (failure) throw failure;
      return 1;
    },
  } as unknown as ResendService;
  return { resend, calls };
}

async function run(failures: (call: number) => Error | undefined) {
  const { resend, calls } = fakeResend(failures);
  const [stdout, stderr] = [text(), text()];
  const ctx = { stdout, stderr } as unknown as CliContext;
  const summary = await replay(resend, merchant, candidates, 10_000, ctx, new AbortController().signal, { brokerPauseMs: 1 });
  const code = report('m_1', summary, ctx);
  return { summary, calls, code, stdout: stdout.text, stderr: stderr.text };
}

const notConnected = () => new ResendStoppedError(0, new BrokerUnavailableError('not connected to RabbitMQ'));

describe('failed replay on a broker that falters', () => {
  it('counts one slow confirm (outcome unknown) as one error and goes on with the rest', async () => {
    const result = await run((call) => (call === 2 ? new ResendStoppedError(0, new ResendOutcomeUnknownError(30_000)) : undefined));
    expect(result.calls).toEqual(['evt_1', 'evt_2', 'evt_3', 'evt_4', 'evt_5']);
    expect(result.summary).toMatchObject({ resent: 4, errors: 1, notTried: 0 });
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('replay of merchant m_1: resent 4, skipped 0, errors 1\n');
  });

  it('tries a webhook again after a brief reconnect (its copy surely not sent), without counting an error', async () => {
    const result = await run((call) => (call === 2 || call === 3 ? notConnected() : undefined));
    expect(result.calls).toEqual(['evt_1', 'evt_2', 'evt_2', 'evt_2', 'evt_3', 'evt_4', 'evt_5']);
    expect(result.summary).toMatchObject({ resent: 5, errors: 0, notTried: 0 });
    expect(result.code).toBe(0);
  });

  it('gives up only when the broker stays away, reporting the untried as not tried, not as errors (exit 1)', async () => {
    const result = await run((call) => (call >= 2 ? notConnected() : undefined));
    expect(result.calls.slice(0, 2)).toEqual(['evt_1', 'evt_2']);
    expect(result.calls.slice(1)).toEqual(Array(BROKER_FAULTS_TO_GIVE_UP).fill('evt_2'));
    expect(result.summary).toMatchObject({ resent: 1, errors: 0, notTried: 4 });
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('replay of merchant m_1 stopped: resent 1, skipped 0, errors 0; 4 not tried: run it again for them\n');
    expect(result.stderr).toContain('not connected to RabbitMQ');
  });
});
