/** Prometheus series the programs export, in one place: the dashboard in docker/ and the tests refer to them. */
export const METRIC_NAMES = {
  /**
   * counter {outcome, event}: delivered|retried|failed|invalid|skipped; deferred (endpoint busy),
   * throttled and circuit_open spend no attempt; requeued (a move the broker did not take);
   * superseded (a stale hand-back of a wait, dropped)
   */
  deliveries: 'webhooks_deliveries_total',
  /** counter: upstream messages acked without delivery, their key (messageId, else the body's digest) seen within INTAKE_DEDUPE_WINDOW */
  duplicates: 'webhooks_duplicates_total',
  /** counter {outcome}: deliveries of test events (the portal's "send test event", x-test-event), apart from the merchants' real webhooks; they are in `deliveries` too */
  testDeliveries: 'webhooks_test_deliveries_total',
  /** counter {reason}: one of FAILED_REASONS (libs/contracts/headers.ts) */
  failed: 'webhooks_failed_total',
  /** histogram, seconds, one HTTP attempt {event, result: success|failure} */
  deliveryDuration: 'webhooks_delivery_duration_seconds',
  /** counter {result: success|failure} */
  attempts: 'webhooks_delivery_attempts_total',
  /** gauge {endpoint}: 1 while the endpoint's circuit is open */
  circuitOpen: 'webhooks_circuit_open',
  /** gauge: endpoints whose circuit is open now, a count (0 when none), beside the per-endpoint series */
  circuitsOpen: 'webhooks_circuits_open',
  /** counter {reason: failing|manual}: webhooks turned off, by the service (auto-disable) or by an operator */
  endpointsDisabledTotal: 'webhooks_endpoints_disabled_total',
  /** gauge {reason: failing|manual}: webhooks off now in the merchant directory */
  endpointsDisabled: 'webhooks_endpoints_disabled',
  /** gauge: enabled webhooks whose failing clock runs (failed a tenth of ENDPOINT_DISABLE_AFTER without a success) */
  endpointsFailing: 'webhooks_endpoints_failing',
  /** gauge: merchants whose newest row this program cannot open (sealed with a key it lacks): it serves their last readable version */
  merchantsUnreadable: 'webhooks_merchants_unreadable',
  /** counter {type}: operational events published (endpoint.disabled, message.attempt.failing, ...) */
  operationalEvents: 'webhooks_operational_events_total',
  /** gauge {queue}: messages ready in dispatch and invalid */
  queueMessages: 'webhooks_queue_messages',
  /** gauge: messages of dispatch this dispatcher has received and not settled yet (held unacked) */
  dispatchUnacked: 'webhooks_dispatch_unacked',
  /** gauge: webhooks waiting for their next attempt (rows of webhook_waits in PostgreSQL) */
  waiting: 'webhooks_waiting',
  /** gauge: waits more than a minute past their due time */
  waitsOverdue: 'webhooks_waits_overdue',
  /** counter {status}: resend API answers by HTTP status */
  resends: 'webhooks_resend_requests_total',
  /** gauge {merchant}: the rate, per second, this dispatcher sends a throttled endpoint at: its maxPerSecond, or lower while its 429/503 answers slow it (only endpoints with a limit) */
  endpointRate: 'webhooks_endpoint_rate_per_second',
  /** gauge: 1 while connected to RabbitMQ */
  brokerConnected: 'webhooks_broker_connected',
  /** gauge: seconds since the deliveries stream last ended where the log held every record, measured by a checkpoint the recorder appends every 5 s (API: from PostgreSQL; recorder: its own view) */
  deliveryLogBehind: 'webhooks_delivery_log_behind_seconds',
  /** gauge: stream messages the recorder has read and not stored yet */
  deliveryLogPending: 'webhooks_delivery_log_pending_messages',
  /** gauge: delivery records stored in PostgreSQL by this recorder since it started (cumulative) */
  deliveryLogStored: 'webhooks_delivery_log_records_stored',
  /** gauge: delivery records PostgreSQL refused, set aside in delivery_log_quarantine by this recorder (cumulative) */
  deliveryLogQuarantined: 'webhooks_delivery_log_records_quarantined',
  /** gauge: stream entries that were not delivery records, set aside in delivery_log_quarantine by this recorder (cumulative) */
  deliveryLogRejected: 'webhooks_delivery_log_entries_rejected',
  /** gauge: bytes of the stream messages the recorder has read and not stored yet */
  deliveryLogPendingBytes: 'webhooks_delivery_log_pending_bytes',
  /** gauge: 1 while this recorder holds the lead (one writes at a time) */
  deliveryLogLeading: 'webhooks_delivery_log_leading',
  /** counter: deliveries the dispatcher settled without their delivery-log record (the deliveries stream refused it) */
  deliveryRecordsLost: 'webhooks_delivery_records_lost_total',
} as const;
