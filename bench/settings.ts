/** What a bench run is asked for (the broker, runs per figure, the scenarios named) and how a figure is taken: the median of the runs. */
import { median, round } from './stats.js';

export const url = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
export const runs = Number(process.env.BENCH_RUNS ?? 3);
export const wanted = new Set(process.argv.slice(2));
export const want = (name: string) => wanted.size === 0 || wanted.has(name);
export const log = (line: string) => process.stdout.write(`${line}\n`);

export async function medianOf<T extends { [K in keyof T]: number }>(name: string, once: () => Promise<T>): Promise<T> {
  const results: T[] = [];
  for (let i = 0; i < runs; i++) {
    results.push(await once());
    log(`${name} run ${i + 1}/${runs}: ${JSON.stringify(results.at(-1))}`);
  }
  const keys = Object.keys(results[0]!) as Array<keyof T>;
  return Object.fromEntries(keys.map((k) => [k, round(median(results.map((r) => r[k] as number)))])) as T;
}
