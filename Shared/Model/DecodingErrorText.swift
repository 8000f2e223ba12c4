/// Turns a DecodingError into "field: problem".
public enum DecodingErrorText {
    /// `root` names the whole document when the problem is at its top.
    public static func describe(_ error: DecodingError, root: String = "payload") -> String {
        func path(_ context: DecodingError.Context, _ key: (any CodingKey)? = nil) -> String {
            var text = ""
            for k in context.codingPath + (key.map { [$0] } ?? []) {
                if let i = k.intValue { text += "[\(i)]" } else { text += text.isEmpty ? k.stringValue : ".\(k.stringValue)" }
            }
            return text.isEmpty ? root : text
        }
        switch error {
        case .keyNotFound(let key, let context): return "\(path(context, key)): required field is missing"
        case .typeMismatch(let type, let context): return "\(path(context)): expected \(typeName(type))"
        case .valueNotFound(let type, let context): return "\(path(context)): expected \(typeName(type)), found null"
        case .dataCorrupted(let context): return "\(path(context)): \(plain(context.debugDescription))"
        @unknown default: return "\(root): unreadable"
        }
    }

    /// JSON's words for a type the decoder expected, never Swift's.
    static func typeName(_ type: Any.Type) -> String {
        switch type {
        case is Int.Type, is Int64.Type, is Int32.Type, is UInt.Type, is UInt64.Type: return "a whole number"
        case is Double.Type, is Float.Type: return "a number"
        case is String.Type: return "a string"
        case is Bool.Type: return "true or false"
        default:
            let name = "\(type)"
            if name.hasPrefix("Dictionary") { return "an object" }
            if name.hasPrefix("Array") { return "an array" }
            return "another kind of value"
        }
    }

    /// The decoder's own sentences, in plain terms.
    static func plain(_ description: String) -> String {
        if description.contains("does not fit in") || description.contains("not representable") {
            return "expected a whole number within ±2^53"
        }
        if description.hasPrefix("expected") { return description }
        if description.contains("not valid JSON") { return "not valid JSON" }
        return description
    }
}

extension DecodingErrorText {
    /// Any error as a reader should see it: decoding errors by field, others as they say.
    public static func describe(any error: any Error) -> String {
        if let decoding = error as? DecodingError { return describe(decoding, root: "payload") }
        return "\(error)"
    }
}
