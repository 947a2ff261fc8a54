import { randomUUID } from 'node:crypto';
import { type BrokerConnection, sendDeclaring } from '../broker/index.js';
import type { Logger } from '../logger/index.js';
import { declareQueueSpec, deliveriesSpec, type Replication, topologyNames } from '../topology/index.js';
import type { DeliveryRecord, DeliveryRecordInput } from './record.js';
import { NamedError } from '../runtime/named-error.js';

/** A message of the deliveries stream closes at this many records, or once past this many bytes. */
export const STREAM_MESSAGE_LIMITS = { records: 200, bytes: 1024 * 1024 };

/**
 * The largest message body a dispatcher takes (MAX_MESSAGE_BYTES at most): its record (escaped, twice
 * its bytes at worst) and STREAM_MESSAGE_LIMITS.bytes of others stay under RabbitMQ 4's 16 MiB max_message_size.
 */
export const MAX_RECORDED_BODY_BYTES = 4 * 1024 * 1024;

/** The stream message holding a record was not confirmed: the delivery must not be acked. */
export class RecordNotConfirmedError extends NamedError {
  constructor(cause: unknown) {
    super(`delivery record not confirmed: ${(cause as Error)?.message ?? String(cause)}`, { cause });
  }
}

export class RecorderStoppedError extends NamedError {
  constructor() {
    super('the delivery recorder is stopped');
  }
}

type Batch = ReturnType<typeof newBatch>;

/**
 * Writes delivery records to `<prefix>.deliveries`, several per stream message; each record()
 * resolves once the broker confirmed the message that holds it. The dispatcher acks a delivery only
 * after that, so a crash cannot leave an attempt unrecorded. Batches are published concurrently.
 */
export class DeliveryRecorder {
  private batch: Batch | undefined;
  private timer?: NodeJS.Timeout;
  private readonly inFlight = new Set<Promise<void>>();
  private stopped = false;
  private stopping?: Promise<void>;
  private readonly stream: string;
  private readonly onConnected = () => void this.declare().catch(() => {});
  /** For sendDeclaring: a send no queue took means an operator deleted the stream. */
  private readonly missing = { declareAgain: () => this.declare(true) };

  constructor(
    private readonly broker: BrokerConnection,
    private readonly logger: Logger,
    /** maxRecords: a batch is published at this many records, or 5 ms after its first. */
    private readonly options: { prefix: string; replication?: Replication; maxRecords?: number },
  ) {
    this.stream = topologyNames(options.prefix).deliveries;
  }

  /** Declares the deliveries stream, now and after every reconnect. */
  async start(): Promise<void> {
    await this.declare();
    this.broker.off('connected', this.onConnected);
    this.broker.on('connected', this.onConnected);
  }

  record(input: DeliveryRecordInput): Promise<void> {
    if (this.stopped) return Promise.reject(new RecorderStoppedError());
    // A record made whole by its writer (the dispatcher's are) is kept as it is, not copied.
    const record: DeliveryRecord =
      input.id !== undefined && input.at !== undefined ? (input as DeliveryRecord) : { ...input, id: input.id ?? randomUUID(), at: input.at ?? new Date().toISOString() };
    const batch = (this.batch ??= newBatch());
    const json = JSON.stringify(record);
    batch.records.push(json);
    batch.bytes += Buffer.byteLength(json) + 1;
    if (batch.records.length >= (this.options.maxRecords ?? STREAM_MESSAGE_LIMITS.records) || batch.bytes >= STREAM_MESSAGE_LIMITS.bytes) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), 5);
    return batch.written;
  }

  /** Publishes what is batched, waits for every publish under way; later calls reject. Safe twice. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.stopped = true;
      this.broker.off('connected', this.onConnected);
      this.flush();
      await Promise.allSettled([...this.inFlight]);
    })();
    return this.stopping;
  }

  private async declare(missing = false): Promise<void> {
    if (missing) this.logger.warn('deliveries stream missing; declaring it again', { stream: this.stream });
    await declareQueueSpec(() => this.broker.createChannel(), deliveriesSpec(this.options.prefix, this.options.replication));
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.batch;
    if (!batch) return;
    this.batch = undefined;
    const publishing = this.publish(batch);
    this.inFlight.add(publishing);
    void publishing.finally(() => this.inFlight.delete(publishing));
  }

  private async publish(batch: Batch): Promise<void> {
    const content = Buffer.from(`[${batch.records.join(',')}]`);
    const properties = { contentType: 'application/json', headers: { 'x-record-count': batch.records.length } };
    try {
      await sendDeclaring(this.missing, () => this.broker.sendToQueue(this.stream, content, properties, 10_000));
      batch.resolve();
    } catch (err) {
      this.logger.warn('delivery records not confirmed', { stream: this.stream, records: batch.records.length, error: (err as Error).message });
      batch.reject(new RecordNotConfirmedError(err));
    }
  }
}

/** Records published together (as JSON, and its bytes), and the one promise their record() calls return. */
function newBatch() {
  let resolve!: () => void;
  let reject!: (err: Error) => void;
  const written = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // A batch nobody awaits is not an unhandled rejection.
  written.catch(() => {});
  return { records: [] as string[], bytes: 0, written, resolve, reject };
}
