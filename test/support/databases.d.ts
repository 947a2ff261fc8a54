// Types of databases.js (a plain ESM file: the global setups load it through Node, not Jest's resolver).

export const TEMPLATE_VARIABLE: string;
export function adminDatabaseUrl(): string;
export function makeDatabaseTemplate(): Promise<void>;
export function dropDatabaseTemplate(): void;
export function noteDatabase(name: string): void;
export function dropInBackground(name: string): void;
export function dropLeftDatabases(): Promise<void>;
