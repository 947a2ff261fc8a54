export interface TopologyNames {
  prefix: string;
  events: string;
  dispatch: string;
  failed: string;
  invalid: string;
  /** Journal of retries scheduled into the tiers, for recovering what a tier fails to hand back. */
  retries: string;
  /** Merchant webhook settings, when MERCHANT_DIRECTORY=broker. */
  merchants: string;
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
    merchants: `${prefix}.merchants`,
    retry: (tier) => `${prefix}.retry.${tier}`,
  };
}
