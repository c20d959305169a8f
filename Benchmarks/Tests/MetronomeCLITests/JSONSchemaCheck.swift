import Foundation

/// Checks a decoded JSON value against the part of JSON Schema our schema files use:
/// `type` (one name or a list), `const`, `required`, `properties`, `items` and `anyOf`.
///
/// Enough to catch a key that went missing or changed type; a full validator would be a
/// dependency for four files.
enum JSONSchemaCheck {
    /// The schema file `Benchmarks/Schemas/<command>.schema.json`.
    static func schema(for command: String, file: String = #filePath) throws -> [String: Any] {
        let url = URL(fileURLWithPath: file).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Schemas/\(command).schema.json")
        let object = try JSONSerialization.jsonObject(with: try Data(contentsOf: url))
        return object as? [String: Any] ?? [:]
    }

    /// Every place where `value` breaks `schema`, as `path: reason`; empty when it conforms.
    static func violations(of value: Any, against schema: [String: Any], at path: String = "$") -> [String] {
        var found: [String] = []
        if let type = schema["type"] {
            let allowed = (type as? [String]) ?? [type as? String ?? ""]
            if !allowed.contains(where: { self.value(value, isOfType: $0) }) {
                found.append("\(path): expected \(allowed.joined(separator: " or ")), got \(Swift.type(of: value))")
                return found
            }
        }
        if let constant = schema["const"], !self.value(value, equals: constant) {
            found.append("\(path): expected \(constant), got \(value)")
        }
        if let object = value as? [String: Any] {
            for key in schema["required"] as? [String] ?? [] where object[key] == nil {
                found.append("\(path): missing required key '\(key)'")
            }
            for (key, property) in schema["properties"] as? [String: [String: Any]] ?? [:] {
                if let child = object[key] {
                    found += self.violations(of: child, against: property, at: "\(path).\(key)")
                }
            }
        }
        if let alternatives = schema["anyOf"] as? [[String: Any]] {
            let failures = alternatives.map { self.violations(of: value, against: $0, at: path) }
            if !failures.contains(where: \.isEmpty) {
                found.append("\(path): matches no alternative: \(failures.map { $0.joined(separator: "; ") })")
            }
        }
        if let array = value as? [Any], let items = schema["items"] as? [String: Any] {
            for (index, element) in array.enumerated() {
                found += self.violations(of: element, against: items, at: "\(path)[\(index)]")
            }
        }
        return found
    }

    private static func value(_ value: Any, isOfType type: String) -> Bool {
        // JSONSerialization gives NSNumber for numbers and booleans alike (and `is Bool` holds
        // for 0 and 1); only a boolean has the C type `char`.
        let number = value as? NSNumber
        let isBoolean = number.map { String(cString: $0.objCType) == "c" } ?? false
        switch type {
        case "object": return value is [String: Any]
        case "array": return value is [Any]
        case "string": return value is String
        case "boolean": return isBoolean
        case "number": return number != nil && !isBoolean
        case "integer": return number.map { !isBoolean && $0.doubleValue == $0.doubleValue.rounded() } ?? false
        case "null": return value is NSNull
        default: return false
        }
    }

    private static func value(_ value: Any, equals constant: Any) -> Bool {
        if let text = constant as? String { return value as? String == text }
        if let number = constant as? NSNumber { return (value as? NSNumber) == number }
        return false
    }
}
