/**
 * Fields a kind does not have. The API server refuses them (kubectl's field validation is Strict),
 * but the JSON schemas of Kubernetes' OpenAPI, which the models validate against, let them by. The
 * same models' TypeScript declarations do not: each object is type-checked here as an object
 * literal of its kind's interface (`IDeployment`, …), where a misspelt field at any depth is an
 * excess property. One compile of a file held in memory, no file written.
 */
import { join } from 'node:path';
import ts from 'typescript';
import { type K8sObject, MODULES, REPO } from './kubernetes.js';

const OPTIONS: ts.CompilerOptions = {
  strict: true,
  noEmit: true,
  skipLibCheck: true,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  target: ts.ScriptTarget.ES2022,
  types: [],
};

/** The declarations read (the models', TypeScript's lib), parsed once for every call. */
const parsed = new Map<string, ts.SourceFile | undefined>();

/** Each object of a kind with models, checked against its interface: the fields it does not have, by object. */
export function unknownFieldProblems(objects: K8sObject[]): string[] {
  const file = join(REPO, 'test/support/kubernetes-objects.virtual.ts');
  const lines: string[] = [];
  const lineOf: K8sObject[] = [];
  objects.forEach((object, i) => {
    const module = MODULES[object.apiVersion];
    if (!module) return;
    lines.push(`import type { I${object.kind} as T${i} } from '${module}/${object.kind}';`);
    lineOf.push(object);
  });
  objects.forEach((object, i) => {
    if (!MODULES[object.apiVersion]) return;
    lines.push(`export const o${i}: T${i} = ${JSON.stringify(object)};`);
    lineOf.push(object);
  });
  const text = lines.join('\n');
  const host = ts.createCompilerHost(OPTIONS);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, version, ...rest) => {
    if (name === file) return ts.createSourceFile(name, text, version);
    if (!parsed.has(name)) parsed.set(name, getSourceFile(name, version, ...rest));
    return parsed.get(name);
  };
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => name === file || fileExists(name);
  const program = ts.createProgram([file], OPTIONS, host);
  return ts.getPreEmitDiagnostics(program, program.getSourceFile(file)).map((d) => {
    const line = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line : -1;
    const object = lineOf[line];
    return `${object ? `${object.kind}/${object.metadata.name}` : 'the check itself'}: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`;
  });
}
