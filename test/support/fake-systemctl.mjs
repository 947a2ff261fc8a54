#!/usr/bin/env node
/**
 * A stand-in for systemctl where no systemd runs (the tests), for test/integration/production-guide.test.ts:
 * `daemon-reload`, `enable [--now]`, `start`, `stop`, `restart` and `is-active` on the unit files of
 * FAKE_SYSTEMD_UNITS. A unit runs as systemd would run it: its ExecStart in its WorkingDirectory,
 * with systemd's PATH, its Environment= and then its EnvironmentFile= (which overrides them), and
 * nothing of the caller's environment. FAKE_SYSTEMD_SUBST ([[from, to], …]) is applied to each unit
 * file as the test applies it to the guide (its own directories and ports); pids are kept in
 * FAKE_SYSTEMD_STATE, output in <unit>.log there. User=, hardening and Restart= are not imitated.
 */
import { spawn } from 'node:child_process';
import { existsSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const unitsDir = process.env.FAKE_SYSTEMD_UNITS;
const stateDir = process.env.FAKE_SYSTEMD_STATE;
const substitutions = JSON.parse(process.env.FAKE_SYSTEMD_SUBST ?? '[]');
const SYSTEMD_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

const apply = (text) => substitutions.reduce((out, [from, to]) => out.replace(new RegExp(from, 'g'), to), text);
const unitName = (name) => (name.endsWith('.service') ? name : `${name}.service`);

function fail(message) {
  process.stderr.write(`systemctl (test stand-in): ${message}\n`);
  process.exit(1);
}

function readUnit(name) {
  const file = join(unitsDir, unitName(name));
  if (!existsSync(file)) fail(`Unit ${unitName(name)} not found.`);
  const unit = { environment: {}, environmentFiles: [], execStart: undefined, workingDirectory: undefined, timeoutStopSec: 90 };
  let section = '';
  for (const raw of apply(readFileSync(file, 'utf8')).split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    const header = /^\[(.+)\]$/.exec(line);
    if (header) {
      section = header[1];
      continue;
    }
    if (section !== 'Service') continue;
    const at = line.indexOf('=');
    const key = line.slice(0, at);
    const value = line.slice(at + 1);
    if (key === 'Environment') {
      for (const assignment of value.split(/\s+/)) unit.environment[assignment.slice(0, assignment.indexOf('='))] = assignment.slice(assignment.indexOf('=') + 1);
    } else if (key === 'EnvironmentFile') unit.environmentFiles.push(value);
    else if (key === 'ExecStart') unit.execStart = value.split(/\s+/);
    else if (key === 'WorkingDirectory') unit.workingDirectory = value;
    else if (key === 'TimeoutStopSec') unit.timeoutStopSec = Number(value);
  }
  if (!unit.execStart || !unit.execStart[0].startsWith('/')) fail(`${unitName(name)}: ExecStart must be an absolute path`);
  return unit;
}

/** systemd's EnvironmentFile: KEY=VALUE lines, # and ; comments, a value in quotes unquoted; `-path` may be missing. */
function readEnvironmentFile(path) {
  const optional = path.startsWith('-');
  const file = optional ? path.slice(1) : path;
  if (!existsSync(file)) {
    if (optional) return {};
    fail(`Failed to load environment files: ${file}: No such file or directory`);
  }
  const env = {};
  for (const raw of readFileSync(file, 'utf8').split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    const match = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line);
    if (!match) continue; // systemd ignores such a line (with a warning)
    const value = match[2];
    env[match[1]] = /^".*"$|^'.*'$/.test(value) ? value.slice(1, -1) : value;
  }
  return env;
}

const pidFile = (name) => join(stateDir, `${unitName(name)}.pid`);

function pidOf(name) {
  if (!existsSync(pidFile(name))) return undefined;
  const pid = Number(readFileSync(pidFile(name), 'utf8'));
  try {
    process.kill(pid, 0);
  } catch {
    return undefined;
  }
  // An exited process nobody reaped yet (a zombie) answers signal 0 too.
  const stat = existsSync(`/proc/${pid}/stat`) ? readFileSync(`/proc/${pid}/stat`, 'utf8') : '';
  return / Z /.test(stat.slice(stat.lastIndexOf(')'))) ? undefined : pid;
}

function start(name) {
  if (pidOf(name)) return;
  const unit = readUnit(name);
  const env = { PATH: SYSTEMD_PATH, ...unit.environment };
  for (const file of unit.environmentFiles) Object.assign(env, readEnvironmentFile(file));
  const log = openSync(join(stateDir, `${unitName(name)}.log`), 'a');
  const child = spawn(unit.execStart[0], unit.execStart.slice(1), { cwd: unit.workingDirectory, env, detached: true, stdio: ['ignore', log, log] });
  writeFileSync(pidFile(name), String(child.pid));
  child.unref();
}

async function stop(name) {
  const pid = pidOf(name);
  if (pid === undefined) return;
  const deadline = Date.now() + readUnit(name).timeoutStopSec * 1000;
  process.kill(pid, 'SIGTERM');
  while (pidOf(name) !== undefined) {
    if (Date.now() > deadline) process.kill(pid, 'SIGKILL');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  rmSync(pidFile(name), { force: true });
}

const [command, ...rest] = process.argv.slice(2);
const now = rest.includes('--now');
const units = rest.filter((arg) => !arg.startsWith('-'));
switch (command) {
  case 'daemon-reload':
    break;
  case 'enable':
    for (const unit of units) readUnit(unit);
    if (now) units.forEach(start);
    break;
  case 'start':
    units.forEach(start);
    break;
  case 'stop':
    for (const unit of units) await stop(unit);
    break;
  case 'restart':
    for (const unit of units) {
      await stop(unit);
      start(unit);
    }
    break;
  case 'is-active':
    process.exit(units.every((unit) => pidOf(unit) !== undefined) ? 0 : 3);
    break;
  default:
    fail(`${command} is not imitated`);
}
