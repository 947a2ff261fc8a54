export interface TopologyNames {
  prefix: string;
  events: string;
  dispatch: string;
  failed: string;
  invalid: string;
  /** Delivery records for the delivery log (what happened to each delivery), read by the recorder. */
  deliveries: string;
  /** Operational events for the platform (endpoint disabled, attempts failing or exhausted): topic exchange, routing key = type. */
  operational: string;
}

export function topologyNames(prefix: string): TopologyNames {
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
