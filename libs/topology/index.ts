export { topologyNames, type TopologyNames } from './names.js';
export {
  DISPATCH_DELIVERY_LIMIT,
  intakeSpec,
  topologySpec,
  type BindingSpec,
  type ExchangeSpec,
  type IntakeSpec,
  type QueueSpec,
  type TopologyOptions,
  type TopologySpec,
} from './spec.js';
export { declareIntake, declareTopology, TopologyMismatchError } from './declare.js';
export { openTopologyBroker } from './broker.js';
