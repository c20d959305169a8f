internal import CMetronome

/// Which timers' handlers the current thread is running, so that `cancelAndWait()` called
/// from inside one of them returns at once instead of waiting for itself.
///
/// Handlers nest where firing is synchronous: one that advances a virtual timeline runs
/// the handlers falling due on its own stack, and any of those may wait for it. So the
/// thread keeps a chain, each link on the stack of the `run` that made it, and its head in
/// a thread-local word of the C core (`mtr_handler_chain`), which every firing reads and
/// writes inline.
enum CurrentHandler {
    private struct Link {
        let owner: UnsafeMutableRawPointer
        let outer: UnsafeMutableRawPointer?
    }

    /// Runs `body` marked as a handler of `owner`, inside whichever handlers already run.
    static func run(for owner: AnyObject, _ body: () -> Void) {
        let outer = mtr_handler_chain()
        var link = Link(owner: Unmanaged.passUnretained(owner).toOpaque(), outer: outer)
        withUnsafeMutablePointer(to: &link) { link in
            mtr_handler_chain_set(link)
            defer { mtr_handler_chain_set(outer) }
            body()
        }
    }

    static func isRunning(for owner: AnyObject) -> Bool {
        let owner = Unmanaged.passUnretained(owner).toOpaque()
        var next = mtr_handler_chain()
        while let link = next?.assumingMemoryBound(to: Link.self).pointee {
            if link.owner == owner { return true }
            next = link.outer
        }
        return false
    }
}
