import { devModeWarning, type TracingConfig, tracingSettingsOf, withDevDefaults } from '../config/index.js';
import { createLogger, type Logger, type LogLevel } from '../logger/index.js';
import { startTracing, stoppingTracing } from '../tracing/index.js';
import { type Running, runUntilSignal } from './run.js';

/** A program's main.ts: its configuration (a bad one exits 1), the dev-mode warning, tracing, then the program run until a signal. */
export async function runProgram<C extends TracingConfig & { LOG_LEVEL: LogLevel; SHUTDOWN_TIMEOUT?: number }>(
  env: Record<string, string | undefined>,
  service: string,
  load: (env: Record<string, string | undefined>) => C,
  start: (config: C, logger: Logger, options: { signal: AbortSignal }) => Promise<Running>,
  /** `tracingName`: the service's name in traces when OTEL_SERVICE_NAME is unset. */
  { tracingName = `webhooks-${service}`, ...tracingOptions }: { activeContext?: boolean; tracingName?: string } = {},
): Promise<void> {
  let config: C;
  try {
    config = load(withDevDefaults(env).env);
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit(1);
  }
  const logger = createLogger({ level: config.LOG_LEVEL, service });
  const devMode = devModeWarning(env);
  if (devMode) logger.warn(devMode.message, devMode.fields);
  // The SDK must be registered before the program's first span.
  const tracing = await startTracing(tracingSettingsOf(config, tracingName), logger, tracingOptions);
  await runUntilSignal(service, async (signal) => stoppingTracing(await start(config, logger, { signal }), tracing, config.SHUTDOWN_TIMEOUT), logger, config.SHUTDOWN_TIMEOUT);
}
