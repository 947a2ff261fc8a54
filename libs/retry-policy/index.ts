export { RetryPolicy } from './policy.js';
