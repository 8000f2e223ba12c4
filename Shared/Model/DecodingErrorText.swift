/// Turns a DecodingError into "field: problem".
public enum DecodingErrorText {
    public static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context, _ key: (any CodingKey)? = nil) -> String {
            var text = ""
            for k in context.codingPath + (key.map { [$0] } ?? []) {
                if let i = k.intValue { text += "[\(i)]" } else { text += text.isEmpty ? k.stringValue : ".\(k.stringValue)" }
            }
            return text.isEmpty ? "payload" : text
        }
        switch error {
        case .keyNotFound(let key, let context): return "\(path(context, key)): required field is missing"
        case .typeMismatch(let type, let context): return "\(path(context)): expected \(typeName(type))"
        case .valueNotFound(let type, let context): return "\(path(context)): expected \(typeName(type)), found null"
        case .dataCorrupted(let context): return "\(path(context)): \(context.debugDescription)"
        @unknown default: return "\(error)"
        }
    }

    static func typeName(_ type: Any.Type) -> String {
        switch type {
        case is Double.Type, is Float.Type, is Int.Type, is Int64.Type: "a number"
        case is String.Type: "a string"
        case is Bool.Type: "true or false"
        default: "\(type)"
        }
    }
}

extension DecodingErrorText {
    /// Any error as a reader should see it: decoding errors by field, others as they say.
    public static func describe(any error: any Error) -> String {
        (error as? DecodingError).map(describe) ?? "\(error)"
    }
}
