/**
 * Prometheus series the programs export. The Grafana dashboard in docker/ and the tests refer to
 * these names, so they live in one place.
 */
export const METRIC_NAMES = {
  /**
   * counter {outcome, event}: delivered|retried|failed|invalid|skipped; deferred (endpoint busy)
   * and circuit_open (postponed, circuit open) spend no attempt; requeued (a move the broker did
   * not take, handed back to its queue); superseded (back from a retry tier after the retry watch
   * had put a copy back: dropped)
   */
  deliveries: 'webhooks_deliveries_total',
  /** counter {reason: attempts-exhausted|circuit-open|blocked|webhook-disabled|merchant-removed} */
  failed: 'webhooks_failed_total',
  /** histogram, seconds, one HTTP attempt {event, result: success|failure} */
  deliveryDuration: 'webhooks_delivery_duration_seconds',
  /** counter {result: success|failure} */
  attempts: 'webhooks_delivery_attempts_total',
  /** gauge {endpoint}: 1 while the endpoint's circuit is open */
  circuitOpen: 'webhooks_circuit_open',
  /** gauge: unresolved failure entries in the API's failed index */
  failedIndexEntries: 'webhooks_failed_index_entries',
  /** gauge {queue}: messages ready in dispatch, retry tiers and invalid */
  queueMessages: 'webhooks_queue_messages',
  /** gauge {queue}: messages moved into a retry tier and not back yet, ready or held by the broker (retries journal) */
  retryWaiting: 'webhooks_retry_waiting',
  /** gauge {queue}: of those, the ones past due by more than RETRY_OVERDUE_AFTER */
  retryOverdue: 'webhooks_retry_overdue',
  /** counter: copies the retry watch put back in dispatch for messages their tier held too long */
  retriesRecovered: 'webhooks_retries_recovered_total',
  /** counter {status}: resend API answers by HTTP status */
  resends: 'webhooks_resend_requests_total',
  /** gauge: 1 while connected to RabbitMQ */
  brokerConnected: 'webhooks_broker_connected',
} as const;
