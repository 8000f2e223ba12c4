/// Finds a key that appears twice in one JSON object. JSON allows it,
/// parsers disagree on which one wins (JSONDecoder takes one, the fast path
/// refuses), so Tracker refuses such payloads everywhere with one rule.
public enum DuplicateKeys {
    /// The first duplicated key in `bytes` (at any depth), or nil. Reads
    /// structure only; the caller's parser still judges the JSON itself.
    public static func first(in bytes: [UInt8]) -> String? {
        var stack: [Set<[UInt8]>?] = []   // one set per open object; nil for arrays
        var i = 0
        var expectingKey = false
        while i < bytes.count {
            let b = bytes[i]
            switch b {
            case UInt8(ascii: "{"): stack.append([]); expectingKey = true
            case UInt8(ascii: "["): stack.append(nil); expectingKey = false
            case UInt8(ascii: "}"), UInt8(ascii: "]"): if !stack.isEmpty { stack.removeLast() }; expectingKey = false
            case UInt8(ascii: ","): expectingKey = stack.last.map { $0 != nil } ?? false
            case UInt8(ascii: "\""):
                let start = i + 1
                i += 1
                while i < bytes.count, bytes[i] != UInt8(ascii: "\"") { i += bytes[i] == UInt8(ascii: "\\") ? 2 : 1 }
                if expectingKey, let top = stack.last, var keys = top {
                    let key = Array(bytes[start..<min(i, bytes.count)])
                    guard keys.insert(key).inserted else { return String(decoding: key.prefix(40), as: UTF8.self) }
                    stack[stack.count - 1] = keys
                    expectingKey = false
                }
            default: break
            }
            i += 1
        }
        return nil
    }
}
