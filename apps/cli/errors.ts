/** The command line was wrong: the message and the command's help are printed, exit 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** The command ran but found nothing to show or act on: exit 3, so scripts can tell it from a failure. */
export class NothingMatchedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NothingMatchedError';
  }
}

/**
 * A queue or stream the command reads is not on the broker (reply 404): the programs never ran with
 * this TOPOLOGY_PREFIX here. Operator commands check rather than declare, so they cannot create a
 * queue with arguments that clash with the programs' (FAILED_RETENTION).
 */
export class MissingQueueError extends Error {
  constructor(readonly queue: string, prefix: string) {
    super(`${queue} does not exist on this broker: no dispatcher or API has declared the topology of TOPOLOGY_PREFIX=${prefix} here`);
    this.name = 'MissingQueueError';
  }
}
