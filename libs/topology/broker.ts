import { BrokerConnection } from '../broker/index.js';
import type { Logger } from '../logger/index.js';
import { declareTopology } from './declare.js';
import type { TopologyOptions } from './spec.js';

/** A program's broker connection: the whole topology declared on every (re)connect, then opened. */
export async function openTopologyBroker(options: {
  url: string | readonly string[];
  name: string;
  logger: Logger;
  topology: TopologyOptions;
  /** Aborts the first connect (a signal during start-up). */
  signal?: AbortSignal;
}): Promise<BrokerConnection> {
  const broker = new BrokerConnection({
    url: options.url,
    name: options.name,
    logger: options.logger,
    declare: (openChannel) => declareTopology(openChannel, options.topology),
  });
  await broker.open(undefined, options.signal);
  return broker;
}
