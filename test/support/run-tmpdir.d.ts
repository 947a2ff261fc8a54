// Types of run-tmpdir.js (a plain ESM file: the global setups load it through Node, not Jest's resolver).

export function useRunTmpdir(): void;
export function removeRunTmpdir(): void;
