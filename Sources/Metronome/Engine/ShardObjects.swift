#if Engine
/// Objects made for an engine, one per shard and key, held weakly: each keeps the engine
/// alive, not the other way round, and lives while its users hold it. What they are is the
/// business of the layers that make them (an ``ExpiringValue``'s set of its type, on the
/// shard of the thread that made it); the engine only keeps the tables, so that threads
/// that make and release their own take no lock another thread takes.
struct ShardObjects: Sendable {
    private struct Weak {
        weak var object: AnyObject?
    }

    private let tables: [LockedBox<[ObjectIdentifier: Weak]>]

    init(shards: Int) {
        self.tables = (0..<min(max(shards, 1), EngineLimits.shards)).map { _ in LockedBox([:]) }
    }

    /// The object for `key` in the current thread's shard, made by `make` when none lives.
    func object<Object: AnyObject>(for key: ObjectIdentifier, make: () -> Object) -> Object {
        let table = self.tables[HomeShard.current(among: self.tables.count)]
        return table.withLockedValue { objects in
            if let object = objects[key]?.object { return unsafeDowncast(object, to: Object.self) }
            let object = make()
            objects[key] = Weak(object: object)
            return object
        }
    }
}
#endif
