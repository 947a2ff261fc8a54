/** A Map of at most `max` entries: past it the oldest set is forgotten. */
export class BoundedMap<K, V> extends Map<K, V> {
  constructor(private readonly max: number) {
    super();
  }

  override set(key: K, value: V): this {
    this.delete(key);
    if (this.size >= this.max) this.delete(this.keys().next().value!);
    return super.set(key, value);
  }
}
