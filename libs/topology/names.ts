export type TopologyNames = ReturnType<typeof topologyNames>;

export function topologyNames(prefix: string) {
  return {
    prefix,
    events: `${prefix}.events`,
    dispatch: `${prefix}.dispatch`,
    failed: `${prefix}.failed`,
    invalid: `${prefix}.invalid`,
    /** Delivery records for the delivery log, read by the recorder. */
    deliveries: `${prefix}.deliveries`,
    /** Operational events for the platform: topic exchange, routing key = type. */
    operational: `${prefix}.operational`,
  };
}
