import Glibc

/// Which timer's handler the current thread is running, so that `cancelAndWait()` called
/// from inside that handler returns at once instead of waiting for itself.
enum CurrentHandler {
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    /// Runs `body` marked as a handler of `owner`; nesting restores the outer mark.
    static func run(for owner: AnyObject, _ body: () -> Void) {
        let previous = pthread_getspecific(self.key)
        pthread_setspecific(self.key, Unmanaged.passUnretained(owner).toOpaque())
        defer { pthread_setspecific(self.key, previous) }
        body()
    }

    static func isRunning(for owner: AnyObject) -> Bool {
        pthread_getspecific(self.key) == Unmanaged.passUnretained(owner).toOpaque()
    }
}
