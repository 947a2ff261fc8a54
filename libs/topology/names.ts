export type TopologyNames = ReturnType<typeof topologyNames>;

export function topologyNames(prefix: string) {
  return {
    prefix,
    events: `${prefix}.events`,
    dispatch: `${prefix}.dispatch`,
    failed: `${prefix}.failed`,
    invalid: `${prefix}.invalid`,
    deliveries: `${prefix}.deliveries`,
    operational: `${prefix}.operational`,
  };
}
