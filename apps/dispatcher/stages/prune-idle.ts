/** Deletes idle entries, least recently used first, down to 90% of `bound`: closed circuits first, then open ones. */
export function pruneIdle<T>(map: Map<string, T>, bound: number, idle: (value: T) => boolean, closed: (value: T) => boolean, forgotten: (key: string) => void): void {
  const target = Math.floor(bound * 0.9);
  for (const closedOnly of [true, false]) {
    for (const [key, value] of map) {
      if (map.size <= target) return;
      if (idle(value) && (!closedOnly || closed(value))) {
        map.delete(key);
        forgotten(key);
      }
    }
  }
}
