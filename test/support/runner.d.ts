// Types of runner.js (a plain ESM file: Jest loads its runner without the ts-jest transform).

/** The reason after a file's `@runs-alone` pragma, or undefined when its first docblock has none. */
export function runsAlone(path: string): string | undefined;

/** The reason after a file's `@runs-quiet` pragma, or undefined when its first docblock has none. */
export function runsQuiet(path: string): string | undefined;

/** How many `@runs-quiet` files run at once. */
export const QUIET_WORKERS: number;

/** Jest's runner (jest-runner's TestRunner): the unmarked files in parallel, then the `@runs-quiet` files two at a time, then the `@runs-alone` files one at a time. */
export default class SharedFirstThenAloneRunner {
  constructor(globalConfig: unknown, context: unknown);
  runTests(tests: Array<{ path: string }>, watcher: { isInterrupted(): boolean }, options: { serial: boolean }): Promise<void>;
}
