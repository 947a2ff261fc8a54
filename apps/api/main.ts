#!/usr/bin/env node
import { runProgram } from '../../libs/runtime/index.js';
import { loadApiConfig } from './config.js';
import { startApi } from './program.js';

await runProgram(process.env, 'api', loadApiConfig, startApi);
