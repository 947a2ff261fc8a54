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
  /** Merchant webhook settings, when MERCHANT_DIRECTORY=broker. */
  merchants: string;
  /** Delivery records for the delivery log (what happened to each delivery), read by the recorder. */
  deliveries: string;
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
    merchants: `${prefix}.merchants`,
    deliveries: `${prefix}.deliveries`,
    retry: (tier) => `${prefix}.retry.${tier}`,
  };
}
