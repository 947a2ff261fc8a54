export { parseDuration, formatDuration } from './durations.js';
export { ConfigError } from './errors.js';
export { envFields, parseEnv } from './env.js';
