export interface TopologyNames {
  prefix: string;
  events: string;
  dispatch: string;
  failed: string;
  invalid: string;
  retry(tier: number): string;
}

export function topologyNames(prefix: string): TopologyNames {
  return {
    prefix,
    events: `${prefix}.events`,
    dispatch: `${prefix}.dispatch`,
    failed: `${prefix}.failed`,
    invalid: `${prefix}.invalid`,
    retry: (tier) => `${prefix}.retry.${tier}`,
  };
}
