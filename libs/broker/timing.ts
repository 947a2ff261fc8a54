/** Reconnect backoff: from 200 ms doubling to 5 s, with ±20% jitter so replicas do not stampede. */
export const BROKER_BACKOFF = { initialMs: 200, maxMs: 5_000, jitter: 0.2 };

/** How long a program tries to reach RabbitMQ at start-up before it exits 1; a connection lost later is retried forever. */
export const BROKER_START_DEADLINE_MS = 30_000;

/** A broker that does not answer a cancel or a close costs this much per step, at most. */
export const CLOSE_STEP_MS = 2_000;
