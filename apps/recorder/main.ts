#!/usr/bin/env node
import { runProgram } from '../../libs/runtime/index.js';
import { loadRecorderConfig } from './config.js';
import { startRecorder } from './program.js';

await runProgram(process.env, 'recorder', loadRecorderConfig, startRecorder);
