import type { GetMessage } from 'amqplib';
import { type BrokerConnection, type HeldMessage, moveMessage, PublishUnconfirmedError } from '../../libs/broker/index.js';
import { brokerPark, copyHeaders, HEADERS, INVALID_CODES, parkedFromUpstream } from '../../libs/contracts/index.js';
import { DISPATCH_DELIVERY_LIMIT, topologyNames, type TopologyNames } from '../../libs/topology/index.js';
import { CLI_BROKER_DEADLINE_MS, withBroker } from './broker.js';
import { CliCommand, EXIT, formatTable, INTERRUPTED, NothingMatchedError, parseLimit, printListing, truncate, UsageError, writeLine } from './command.js';

/** What a pass did; `interrupted`: Ctrl-C ended it before the last message. */
type PassResult = { kept: number; moved: number; interrupted: boolean };

/** A message parked in invalid, with the reason the dispatcher (or the broker: byBroker) gave. */
type ParkedMessage = ReturnType<typeof parkedOf>;

const NO_REQUEUE = `How it reads the queue: every message present when the command starts is taken, handled, published
again (with a publisher confirm) and only then acknowledged. Nothing is ever returned with a
requeue: RabbitMQ 4.x quorum queues drop a message returned 20 times (delivery-limit), and a
message taken and left unacknowledged when a channel closes counts as returned. Messages keep their
order; ones parked while the command runs are left for the next run. Run one at a time per queue.`;

/**
 * Passes once over what invalid holds at the start (NO_REQUEUE), putting each message back or moving it to
 * dispatch, as `verdict` says. One at a time, so that acks never pile up before the channel closes (quorum
 * queues can drop acks sent just before a close: rabbitmq-server#10327). `result` counts as it goes.
 */
async function passOverInvalid(
  broker: BrokerConnection,
  names: TopologyNames,
  result: PassResult,
  interrupted: AbortSignal,
  verdict: (parked: ParkedMessage) => 'keep' | 'move',
): Promise<PassResult> {
  const channel = await broker.createChannel();
  try {
    const { messageCount } = await channel.checkQueue(names.invalid);
    for (let i = 0; i < messageCount; i++) {
      if (interrupted.aborted) {
        result.interrupted = true;
        break;
      }
      const message = await channel.get(names.invalid, { noAck: false });
      if (message === false) break; // someone else took the rest
      const parked = parkedOf(message, names);
      const move = verdict(parked) === 'move';
      const headers = {
        ...copyHeaders(message.properties.headers, { from: 'parked', unpark: move, upstreamExchange: names.events, dispatch: names.dispatch }),
        ...brokerHeaders(parked, move),
      };
      let refused: Error | undefined;
      const held: HeldMessage = { content: message.content, properties: message.properties, live: true, ack: () => channel.ack(message), nack: () => {} };
      // One try, within a deadline (an alarm blocks publishers): a copy not confirmed fails the pass, and the message
      // returns to invalid once, when the channel closes.
      const to = move ? names.dispatch : names.invalid;
      const moved = await moveMessage(broker, held, to, { backoffMs: [], deadlineMs: CLI_BROKER_DEADLINE_MS, headers: () => headers, onRetry: (err) => (refused = err) });
      if (refused instanceof PublishUnconfirmedError) {
        // Its copy may still be stored: the message may then be in both queues (or twice in invalid).
        throw new Error(
          `RabbitMQ did not confirm a copy within ${refused.deadlineMs} ms (a memory or disk alarm blocks publishers?): ` +
            `${parked.messageId ?? 'a message'} is back in ${names.invalid} and may be ${move ? `in ${to} too` : 'there twice'}`,
        );
      }
      if (moved !== 'moved') throw refused ?? new Error('parked message not moved');
      result[move ? 'moved' : 'kept']++;
    }
  } finally {
    await channel.close().catch(() => {});
  }
  return result;
}

/**
 * What the broker's park (x-death) said, as our parks note it. The routing key of upstream's publish: moved back,
 * intake checks it as a redelivery, so endpoints reached before its crash loop do not get it again. Kept, its
 * verdict: putting it back drops its x-death, and the code with it.
 */
function brokerHeaders(parked: ParkedMessage, move: boolean): Record<string, string> {
  const notes: Array<[string, string | null]> = [[HEADERS.originalRoutingKey, parked.upstream ? parked.originalRoutingKey : null]];
  if (parked.byBroker && !move) {
    notes.push([HEADERS.invalidCode, parked.code], [HEADERS.invalidReason, parked.reason]);
    notes.push([HEADERS.invalidAt, parked.invalidAt]);
  }
  return Object.fromEntries(notes.filter((note): note is [string, string] => note[1] !== null));
}

export function parkedOf(message: GetMessage, names: Pick<TopologyNames, 'dispatch' | 'events'>) {
  const headers = message.properties.headers ?? {};
  // Parked by the broker (delivery-limit, or rejected by the dispatcher), its verdict is the only one: an
  // x-invalid-* it carries is upstream's. Expired, it has no code.
  const park = brokerPark(headers, names.dispatch);
  const limited = park?.reason === 'delivery_limit';
  const rejected = park?.reason === 'rejected';
  const ours = park === undefined;
  const upstream = !ours && parkedFromUpstream(park, names.events);
  return {
    code: limited ? 'delivery-limit' : rejected ? 'internal-error' : ours ? text(headers[HEADERS.invalidCode]) : null,
    reason: limited
      ? `delivered ${DISPATCH_DELIVERY_LIMIT} times without an outcome: the dispatcher crashed or lost its connection holding it each time`
      : rejected
        ? 'internal-error: the dispatcher failed unexpectedly on it and could not park it itself (its log says why); rejected, the broker dead-lettered it'
        : ours ? text(headers[HEADERS.invalidReason]) : null,
    // The broker's x-death time is in seconds.
    invalidAt: ours ? text(headers[HEADERS.invalidAt]) : park.time === undefined ? null : new Date(park.time * 1000).toISOString(),
    originalRoutingKey: upstream ? text(park.routingKey) : text(headers[HEADERS.originalRoutingKey]),
    messageId: text(message.properties.messageId),
    body: message.content,
    byBroker: !ours,
    upstream,
  };
}

function text(value: unknown): string | null {
  return typeof value === 'string' && value.length > 0 ? value : null;
}

const HELP_AFTER = `
Codes: ${INVALID_CODES.join(', ')}
(delivery-limit: parked by the broker itself after too many returns to dispatch).

${NO_REQUEUE}
${EXIT}`;

function checkCode(code: string | undefined): string | undefined {
  if (code !== undefined && !(INVALID_CODES as readonly string[]).includes(code)) {
    throw new UsageError(`--code: unknown code "${code}"; the codes are ${INVALID_CODES.join(', ')}`);
  }
  return code;
}

function nothingParked(names: TopologyNames, code: string | undefined): string {
  return code === undefined ? `${names.invalid} is empty` : `no parked message has code ${code}`;
}

/** The first 200 characters of a body; 4 bytes per character at most, so a huge body is not decoded whole. */
function bodyPreview(body: Buffer): string {
  return body.subarray(0, 800).toString('utf8').slice(0, 200);
}

function parkedTable(messages: ParkedMessage[]): string {
  return formatTable(
    ['CODE', 'INVALID AT', 'ROUTING KEY', 'MESSAGE ID', 'BYTES', 'REASON', 'BODY'],
    messages.map((m) => [
      m.code ?? '-',
      m.invalidAt ?? '-',
      m.originalRoutingKey ?? '-',
      m.messageId ?? '-',
      String(m.body.length),
      truncate(m.reason ?? '-', 80),
      bodyPreview(m.body),
    ]),
  );
}

function parkedJson({ body, byBroker: _byBroker, upstream: _upstream, ...fields }: ParkedMessage): Record<string, unknown> {
  return { ...fields, bodyBytes: body.length, body: bodyPreview(body) };
}

export function declareInvalid(program: CliCommand): void {
  const invalid = program
    .command('invalid')
    .usage('<list|requeue> [options]')
    .description('Messages parked in <TOPOLOGY_PREFIX>.invalid: list them, move them back once fixed.');

  invalid
    .command('list')
    .summary('shows parked messages and why, without removing them')
    .description(
      'Shows the messages parked in <TOPOLOGY_PREFIX>.invalid: code, reason, invalid-at, original routing ' +
        'key, message id, body size and the first 200 characters of the body. Removes nothing.',
    )
    .option('--code <code>', 'only this code (below)')
    .option('--limit <n>', 'show at most N, in queue order', '500')
    .option('--json', 'one JSON array on stdout, for scripts', false)
    .addHelpText('after', `${HELP_AFTER} (${INTERRUPTED}: Ctrl-C stopped it after the message in hand, the ones it read put behind those it did not reach)`)
    .handle(
      (raw: { code?: string; limit: string; json: boolean }) => ({ code: checkCode(raw.code), limit: parseLimit(raw.limit), json: raw.json }),
      async (options, ctx) => {
        const names = topologyNames(ctx.config.TOPOLOGY_PREFIX);
        const shown: ParkedMessage[] = [];
        let matched = 0;
        // The whole queue is passed over even past --limit, so it ends in the order it started in.
        const pass = await withBroker(ctx.config, [names.invalid], (broker) =>
          ctx.interruptible((interrupted) =>
            passOverInvalid(broker, names, { kept: 0, moved: 0, interrupted: false }, interrupted, (parked) => {
              if (options.code === undefined || parked.code === options.code) {
                matched++;
                if (shown.length < options.limit) shown.push(parked);
              }
              return 'keep';
            }),
          ),
        );
        if (pass.interrupted) {
          // Scripts get their array even when nothing matched yet; the exit code says it was cut short.
          if (options.json) writeLine(ctx.stdout, JSON.stringify(shown.map(parkedJson)));
          else if (shown.length > 0) writeLine(ctx.stdout, parkedTable(shown));
          writeLine(ctx.stderr, `interrupted: read ${pass.kept} message(s) of ${names.invalid}, now behind the ones it did not reach: run it again for the whole list`);
          return INTERRUPTED;
        }
        printListing(ctx, options.json, shown.map(parkedJson), nothingParked(names, options.code), () => parkedTable(shown));
        if (shown.length < matched) writeLine(ctx.stderr, `showing the first ${shown.length} of ${matched}; raise --limit to see more`);
      },
    );

  invalid
    .command('requeue')
    .summary('moves parked messages back to dispatch once their cause is fixed')
    .usage('(--code <code> | --all) [--dry-run]')
    .description(
      'After a fix upstream or in the merchant directory, moves parked messages back to ' +
        '<TOPOLOGY_PREFIX>.dispatch: body, messageId and headers kept, the x-invalid-* headers removed. If ' +
        'the cause is not fixed, the dispatcher parks them again.',
    )
    .option('--code <code>', 'move the messages with this code (below)')
    .option('--all', 'move every parked message', false)
    .option('--dry-run', 'move nothing; print what would move', false)
    .addHelpText('after', `${HELP_AFTER} (3: no parked message matched; ${INTERRUPTED}: Ctrl-C stopped it after the message in hand, the ones it kept put behind those it did not reach)`)
    .handle(
      (raw: { code?: string; all: boolean; dryRun: boolean }) => {
        // Moving everything must be asked for by name, never be what a forgotten --code does.
        if (raw.code === undefined && !raw.all) throw new UsageError('invalid requeue needs --code <code> or --all');
        if (raw.code !== undefined && raw.all) throw new UsageError('give --code <code> or --all, not both');
        return { code: checkCode(raw.code), dryRun: raw.dryRun };
      },
      async (options, ctx) => {
        const names = topologyNames(ctx.config.TOPOLOGY_PREFIX);
        const matching: ParkedMessage[] = [];
        const result: PassResult = { kept: 0, moved: 0, interrupted: false };
        await withBroker(ctx.config, [names.invalid, names.dispatch], (broker) =>
          ctx.interruptible((interrupted) =>
            passOverInvalid(broker, names, result, interrupted, (parked) => {
              if (options.code !== undefined && parked.code !== options.code) return 'keep';
              matching.push(parked);
              return options.dryRun ? 'keep' : 'move';
            }),
          ),
        ).catch((err: unknown) => {
          // Each move was confirmed before its original was acked: those made stand.
          if (result.moved === 0) throw err;
          throw new Error(
            `${(err as Error)?.message ?? String(err)}; ${result.moved} message(s) moved to ${names.dispatch} before it stopped; the rest are still in ${names.invalid}: run it again once the cause is gone`,
            { cause: err },
          );
        });
        if (result.interrupted) {
          writeLine(ctx.stdout, `interrupted: moved ${result.moved} message(s) to ${names.dispatch}; the rest are still in ${names.invalid}: run it again for them`);
          return INTERRUPTED;
        }
        if (matching.length === 0) throw new NothingMatchedError(nothingParked(names, options.code));
        if (options.dryRun) {
          writeLine(ctx.stdout, parkedTable(matching));
          writeLine(ctx.stdout, `dry run: would move ${matching.length} message(s) to ${names.dispatch}; nothing was moved`);
        } else {
          writeLine(ctx.stdout, `moved ${result.moved} message(s) to ${names.dispatch}; ${result.kept} left in ${names.invalid}`);
        }
      },
    );
}
