export interface TopologyNames {
  prefix: string;
  events: string;
  dispatch: string;
  failed: string;
  invalid: string;
  /** Journal of retries scheduled into the tiers, for recovering what a tier fails to hand back. */
  retries: string;
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
    retry: (tier) => `${prefix}.retry.${tier}`,
  };
}
