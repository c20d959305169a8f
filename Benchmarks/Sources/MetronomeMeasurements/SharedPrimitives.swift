// The lock box, clock readings, seeded generator, threads and interval stabbing the
// measurements are built on are shared with the root package's tests, in one copy; the CLI
// and the measurement tests see them through this module.
@_exported import MetronomeTestSupport
