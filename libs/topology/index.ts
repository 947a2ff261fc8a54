export { topologyNames, type TopologyNames } from './names.js';
export { DELIVERIES_RETENTION, deliveriesSpec, FAILED_SEGMENT_BYTES, failedSpec, DISPATCH_DELIVERY_LIMIT } from './spec.js';
export { intakeSpec, topologySpec, type Replication, type TopologySpec } from './spec.js';
export { declareIntake, declareQueueSpec, declareTopology, openTopologyBroker, TopologyMismatchError } from './declare.js';
