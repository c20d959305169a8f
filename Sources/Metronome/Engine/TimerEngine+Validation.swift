#if Engine
internal import CMetronome
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension TimerEngine.Configuration {
    /// Checks every setting against what an engine can honour, naming the first one that
    /// it cannot.
    ///
    /// ```swift
    /// do {
    ///     try TimerEngine.Configuration(realtimePriority: 0).validate()
    /// } catch {
    ///     print(error)   // realtimePriority must be nil or in 1...99, not 0
    /// }
    /// ```
    ///
    /// - Throws: ``TimerError`` with `EINVAL`, its ``TimerError/setting`` naming the refused
    ///   setting and its ``TimerError/reason`` the allowed range: a real-time priority
    ///   outside 1...99, a CPU the machine does not have, a spin window outside
    ///   0...``maximumSpinWindow``, a late threshold under a nanosecond, or a shard count
    ///   outside 1...``maximumShards``.
    public func validate() throws(TimerError) {
        guard let setting = self.refusedSetting else { return }
        throw .invalid(setting.name, setting.reason(self), in: "mtr_engine_create")
    }

    /// A setting as the C core names it, with the rule it holds a configuration to.
    enum Setting: CaseIterable {
        case realtimePriority, cpu, spinWindow, lateThreshold, shards

        var name: String { "\(self)" }

        /// The allowed range, and the value that is not in it.
        func reason(_ configuration: TimerEngine.Configuration) -> String {
            switch self {
            case .realtimePriority:
                "must be nil or in 1...\(EngineLimits.realtimePriority), not \(configuration.realtimePriority ?? 0)"
            case .cpu: "must be nil or in 0..<\(EngineLimits.cpus), not \(configuration.cpu ?? -1)"
            case .spinWindow:
                "must be in 0...\(TimerEngine.Configuration.maximumSpinWindow), not \(configuration.spinWindow)"
            case .lateThreshold: "must be at least a nanosecond, not \(configuration.lateThreshold)"
            case .shards: "must be in 1...\(EngineLimits.shards), not \(configuration.shards)"
            }
        }

        /// The rule, for the build without the C core; with it, the core's check decides,
        /// and `EngineLimitsTests` holds the two to the same answers.
        func admits(_ configuration: TimerEngine.Configuration) -> Bool {
            switch self {
            case .realtimePriority:
                configuration.realtimePriority.map { (1...EngineLimits.realtimePriority).contains($0) } ?? true
            case .cpu: configuration.cpu.map { (0..<EngineLimits.cpus).contains($0) } ?? true
            case .spinWindow:
                (0...EngineLimits.spinWindowNanoseconds).contains(configuration.spinWindow.saturatingNanoseconds)
            case .lateThreshold: configuration.lateThreshold.saturatingNanoseconds > 0
            case .shards: (1...EngineLimits.shards).contains(configuration.shards)
            }
        }
    }

    #if Engine
    /// The first setting the C core's check refuses: the core owns the rules.
    var refusedSetting: Setting? {
        let refused = self.withCoreConfig { (config: inout mtr_engine_config) in
            // Any callback: the check asks only that there is one.
            config.on_fire = { _, _ in }
            var setting = mtr_engine_setting.MTR_SETTING_NONE
            _ = mtr_engine_config_check(&config, &setting)
            return setting
        }
        switch refused {
        case .MTR_SETTING_REALTIME_PRIORITY: return .realtimePriority
        case .MTR_SETTING_CPU: return .cpu
        case .MTR_SETTING_SPIN: return .spinWindow
        case .MTR_SETTING_LATE_THRESHOLD: return .lateThreshold
        case .MTR_SETTING_SHARDS: return .shards
        case .MTR_SETTING_NONE, .MTR_SETTING_ON_FIRE: return nil
        }
    }

    /// The configuration in the C core's terms, for `body` to complete and use. C's 0 and -1
    /// mean "none", which Swift spells `nil`: a priority below 1 or a CPU below 0 maps to a
    /// value the core refuses, so the core judges every value a caller wrote.
    func withCoreConfig<Result>(_ body: (inout mtr_engine_config) -> Result) -> Result {
        var config = mtr_engine_config()
        mtr_engine_config_init(&config)
        config.realtime_priority = self.realtimePriority.map { $0 >= 1 ? CInt(clamping: $0) : -1 } ?? 0
        config.cpu = self.cpu.map { $0 >= 0 ? CInt(clamping: $0) : -2 } ?? -1
        config.spin_ns = self.spinWindow.saturatingNanoseconds
        config.late_threshold_ns = self.lateThreshold.saturatingNanoseconds
        config.shards = self.shards >= 1 ? UInt32(clamping: self.shards) : UInt32.max
        guard let name = self.name else { return body(&config) }
        return name.withCString { name in
            config.name = name
            return body(&config)
        }
    }
    #else
    var refusedSetting: Setting? {
        Setting.allCases.first { !$0.admits(self) }
    }
    #endif
}
