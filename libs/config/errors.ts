/** Start-up configuration is wrong; the message names the variable so an operator can fix it. */
export class ConfigError extends Error {
  constructor(readonly variable: string, detail: string) {
    super(`Invalid configuration: ${variable}: ${detail}`);
    this.name = 'ConfigError';
  }
}
