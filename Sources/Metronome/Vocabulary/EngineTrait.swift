// The engine is the package trait `Engine`, on by default on Linux. A client that names its
// traits replaces the defaults, so `traits: ["ServiceLifecycle"]` drops the engine without
// a word; on Linux, where the engine is what the library is for, the build says so. SwiftPM
// silences the warnings of a package fetched by URL, so there a client sees it only in the
// descriptions, which say GCD serves (TimerEngine+Description.swift).
#if os(Linux) && !Engine
#warning(
    "Metronome is built without its Engine trait: GCD serves every timer. Naming traits replaces the defaults, so keep `.defaults` among them to keep the engine: traits: [.defaults, \"ServiceLifecycle\"]"
)
#endif
