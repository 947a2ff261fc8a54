export { topologyNames, type TopologyNames } from './names.js';
export { declareIntake, declareTopology, TopologyMismatchError, type TopologyOptions } from './declare.js';
