export { topologyNames, type TopologyNames } from './names.js';
export {
  CREATION_ONLY_ARGUMENTS,
  DEFAULT_REPLICATION,
  DELIVERIES_RETENTION,
  deliveriesSpec,
  FAILED_SEGMENT_BYTES,
  failedSpec,
  DISPATCH_DELIVERY_LIMIT,
  intakeSpec,
  operationalBinding,
  topologySpec,
  type BindingSpec,
  type ExchangeSpec,
  type IntakeSpec,
  type QueueSpec,
  type Replication,
  type TopologyOptions,
  type TopologySpec,
} from './spec.js';
export { type ChannelSource, declareIntake, declareQueueSpec, declareTopology, TopologyMismatchError } from './declare.js';
export { openTopologyBroker } from './broker.js';
