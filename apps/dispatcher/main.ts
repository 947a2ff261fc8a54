#!/usr/bin/env node
import { runProgram } from '../../libs/runtime/index.js';
import { loadDispatcherConfig } from './config.js';
import { startDispatcher } from './program.js';

// The dispatcher passes its spans by hand: no active context (stages/trace.ts).
await runProgram(process.env, 'dispatcher', loadDispatcherConfig, startDispatcher, { activeContext: false });
