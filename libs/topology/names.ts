export interface TopologyNames {
  prefix: string;
  events: string;
  dispatch: string;
  failed: string;
  invalid: string;
  /** Journal of retries scheduled into the tiers, for recovering what a tier fails to hand back. */
  retries: string;
  /** Snapshots of the retry watch's state, so a starting dispatcher reads the journal from the newest one on. */
  retrySnapshots: string;
  /** Delivery records for the delivery log (what happened to each delivery), read by the recorder. */
  deliveries: string;
  /** Operational events for the platform (endpoint disabled, attempts failing or exhausted): topic exchange, routing key = type. */
  operational: string;
  retry(tier: number): string;
}

export function topologyNames(prefix: string): TopologyNames {
  return {
    prefix,
    events: `${prefix}.events`,
    dispatch: `${prefix}.dispatch`,
    failed: `${prefix}.failed`,
    invalid: `${prefix}.invalid`,
    retries: `${prefix}.retries`,
    retrySnapshots: `${prefix}.retries.snapshots`,
    deliveries: `${prefix}.deliveries`,
    operational: `${prefix}.operational`,
    retry: (tier) => `${prefix}.retry.${tier}`,
  };
}
