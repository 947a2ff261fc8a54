import { brokerAnswers } from '../support/global-setup.js';
import { brokerUrl } from '../support/broker.js';
import { freePort } from '../support/receiver.js';

describe('the test run finds a broker as the programs do', () => {
  it('takes a broker that answers (npm test uses the local one on 127.0.0.1:5672 when RABBITMQ_URL is unset)', async () => {
    expect(await brokerAnswers(brokerUrl())).toBe(true);
  });

  it('passes over an address where nothing answers, so testcontainers or a clear message comes next', async () => {
    expect(await brokerAnswers(`amqp://guest:guest@127.0.0.1:${await freePort()}`, 1_000)).toBe(false);
  });
});
