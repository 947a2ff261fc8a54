export { topologyNames, type TopologyNames } from './names.js';
export { declareTopology, TopologyMismatchError, type TopologyOptions } from './declare.js';
