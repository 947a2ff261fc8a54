export { parseDuration } from './durations.js';
export { ConfigError, deliveryLogFields, envFields, parseEnv, refuse, replicationFields, replicationOf, SHUTDOWN_TIMEOUT_MAX, topologyOf } from './env.js';
export { DEV_JWT_SECRET, DEV_MERCHANTS_FILE, devModeWarning, withDevDefaults } from './dev.js';
export { tracingFields, tracingSettingsOf, type TracingConfig, type TracingSettings } from './tracing.js';
export { DEV_SECRETS_KEY, merchantStoreFields, requireMerchantStore } from './merchants.js';
