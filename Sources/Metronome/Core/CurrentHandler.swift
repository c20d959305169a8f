#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Which timers' handlers the current thread is running, so that `cancelAndWait()` called
/// from inside one of them returns at once instead of waiting for itself.
///
/// Handlers nest where firing is synchronous: one that advances a virtual timeline runs
/// the handlers falling due on its own stack, and any of those may wait for it. So the
/// thread keeps a chain, each link on the stack of the `run` that made it, and its head in
/// a thread-specific word. A forked child's one thread keeps the forking thread's word, as
/// it keeps that thread's stack.
enum CurrentHandler {
    private struct Link {
        let owner: UnsafeMutableRawPointer
        let outer: UnsafeMutableRawPointer?
    }

    private static let head: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    /// Runs `body` marked as a handler of `owner`, inside whichever handlers already run.
    static func run(for owner: AnyObject, _ body: () -> Void) {
        let outer = pthread_getspecific(self.head)
        var link = Link(owner: Unmanaged.passUnretained(owner).toOpaque(), outer: outer)
        withUnsafeMutablePointer(to: &link) { link in
            pthread_setspecific(self.head, link)
            defer { pthread_setspecific(self.head, outer) }
            body()
        }
    }

    static func isRunning(for owner: AnyObject) -> Bool {
        let owner = Unmanaged.passUnretained(owner).toOpaque()
        var next = pthread_getspecific(self.head)
        while let link = next?.assumingMemoryBound(to: Link.self).pointee {
            if link.owner == owner { return true }
            next = link.outer
        }
        return false
    }
}
