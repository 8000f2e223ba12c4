import FoundationEssentials

/// Where JSON text first breaks: FoundationEssentials' decoder says only
/// that data is not valid JSON. A syntax check alone (RFC 8259, numbers
/// within a Double's range), no values built.
public struct JSONSyntax {
    public struct Problem: Error, Equatable {
        /// The byte the text breaks at (its length for a text cut short).
        public var offset: Int
        public var message: String

        public init(offset: Int, message: String) { self.offset = offset; self.message = message }
    }

    private let bytes: [UInt8]
    private var index = 0
    /// Deeper than any settings file, shallow enough for the stack.
    private static let maxDepth = 256

    /// The first problem in `bytes`, or nil if they are one valid JSON value.
    public static func firstProblem(in bytes: some Collection<UInt8>) -> Problem? {
        var scanner = JSONSyntax(bytes: Array(bytes))
        do {
            try scanner.value(depth: 0)
            scanner.skipSpace()
            if scanner.index < scanner.bytes.count { throw scanner.problem("unexpected text after the value") }
            return nil
        } catch {
            return error as? Problem
        }
    }

    private init(bytes: [UInt8]) { self.bytes = bytes }

    private func problem(_ message: String) -> Problem { Problem(offset: index, message: message) }

    private var next: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipSpace() {
        while let byte = next, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { index += 1 }
    }

    private mutating func expect(_ byte: UInt8, _ message: String) throws {
        skipSpace()
        guard next == byte else { throw problem(next == nil ? "unexpected end of file" : message) }
        index += 1
    }

    private mutating func value(depth: Int) throws {
        skipSpace()
        guard let byte = next else { throw problem("unexpected end of file") }
        switch byte {
        case UInt8(ascii: "{"):
            guard depth < Self.maxDepth else { throw problem("nested too deeply") }
            try object(depth: depth + 1)
        case UInt8(ascii: "["):
            guard depth < Self.maxDepth else { throw problem("nested too deeply") }
            try array(depth: depth + 1)
        case UInt8(ascii: "\""): try string()
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try number()
        default: throw problem("invalid value")
        }
    }

    private mutating func object(depth: Int) throws {
        index += 1
        skipSpace()
        if next == UInt8(ascii: "}") { index += 1; return }
        while true {
            skipSpace()
            guard next == UInt8(ascii: "\"") else { throw problem(next == nil ? "unexpected end of file" : "expected a quoted key") }
            try string()
            try expect(UInt8(ascii: ":"), "expected ':' after the key")
            try value(depth: depth)
            skipSpace()
            guard let byte = next else { throw problem("unexpected end of file") }
            index += 1
            if byte == UInt8(ascii: "}") { return }
            guard byte == UInt8(ascii: ",") else { index -= 1; throw problem("expected ',' or '}'") }
        }
    }

    private mutating func array(depth: Int) throws {
        index += 1
        skipSpace()
        if next == UInt8(ascii: "]") { index += 1; return }
        while true {
            try value(depth: depth)
            skipSpace()
            guard let byte = next else { throw problem("unexpected end of file") }
            index += 1
            if byte == UInt8(ascii: "]") { return }
            guard byte == UInt8(ascii: ",") else { index -= 1; throw problem("expected ',' or ']'") }
        }
    }

    private mutating func string() throws {
        index += 1
        while let byte = next {
            switch byte {
            case UInt8(ascii: "\""): index += 1; return
            case UInt8(ascii: "\\"):
                index += 1
                guard let escaped = next else { break }
                if escaped == UInt8(ascii: "u") {
                    for _ in 0..<4 {
                        index += 1
                        guard let hex = next, (hex >= 0x30 && hex <= 0x39) || (hex | 0x20 >= 0x61 && hex | 0x20 <= 0x66) else {
                            throw problem("invalid \\u escape")
                        }
                    }
                } else if !"\"\\/bfnrt".utf8.contains(escaped) {
                    throw problem("invalid escape")
                }
                index += 1
            case 0..<0x20: throw problem("a control character in a string (a line break must be written \\n)")
            default: index += 1
            }
        }
        throw problem("unterminated string")
    }

    private mutating func literal(_ word: String) throws {
        for expected in word.utf8 {
            guard next == expected else { throw problem("invalid value") }
            index += 1
        }
    }

    private mutating func number() throws {
        let start = index
        if next == UInt8(ascii: "-") { index += 1 }
        guard let first = next, isDigit(first) else { throw problem("invalid number") }
        index += 1
        if first != UInt8(ascii: "0") { skipDigits() }
        if next == UInt8(ascii: ".") {
            index += 1
            guard let digit = next, isDigit(digit) else { throw problem("invalid number") }
            skipDigits()
        }
        if next == UInt8(ascii: "e") || next == UInt8(ascii: "E") {
            index += 1
            if next == UInt8(ascii: "+") || next == UInt8(ascii: "-") { index += 1 }
            guard let digit = next, isDigit(digit) else { throw problem("invalid number") }
            skipDigits()
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        guard let value = Double(text), value.isFinite else { index = start; throw problem("number out of range") }
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }

    private mutating func skipDigits() { while let byte = next, isDigit(byte) { index += 1 } }
}
