// Types of database-template.js (a plain ESM file: the global setups load it through Node, not Jest's resolver).

export const TEMPLATE_VARIABLE: string;
export function adminDatabaseUrl(): string;
export function makeDatabaseTemplate(): Promise<void>;
export function dropDatabaseTemplate(): Promise<void>;
