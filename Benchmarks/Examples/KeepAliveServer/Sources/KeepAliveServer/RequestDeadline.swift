/// A request's work took longer than its deadline: the server answers 503.
struct DeadlineExceeded: Error {}
