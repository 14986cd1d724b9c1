// How Kafka's SslPrincipalMapper applies one rule to a distinguished name: its Rule.apply,
// Java's regular expressions (Pattern.matcher(name).matches(), then name.replaceAll with the
// replacement as Kafka's escapeLiteralBackReferences prepares it, copied here) and
// toLowerCase/toUpperCase(Locale.ENGLISH). Each argument is "pattern replacement case name",
// each part the hex of its UTF-8 (case: "", "L" or "U"); for each, "OK <UTF-16 code units of
// the result, in hex>", "NONE" where the rule does not match, or "ERR <why>" where applying
// it throws (Kafka fails the authentication).
// Run as `java SslRules.java ...` (tests/unit/test_principal_mapping.py).
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

public class SslRules {
    static String text(String hex) {
        return new String(HexFormat.of().parseHex(hex), StandardCharsets.UTF_8);
    }

    static final Pattern BACK_REFERENCE_PATTERN = Pattern.compile("\\$(\\d+)");

    // Kafka's SslPrincipalMapper.Rule.escapeLiteralBackReferences, as it is.
    static String escapeLiteralBackReferences(final String unescaped, final int numCapturingGroups) {
        if (numCapturingGroups == 0) {
            return unescaped;
        }
        String value = unescaped;
        final Matcher backRefMatcher = BACK_REFERENCE_PATTERN.matcher(value);
        while (backRefMatcher.find()) {
            final String backRefNum = backRefMatcher.group(1);
            if (backRefNum.startsWith("0")) {
                continue;
            }
            int backRefIndex = Integer.parseInt(backRefNum);
            while (backRefIndex > numCapturingGroups && backRefIndex >= 10) {
                backRefIndex /= 10;
            }
            if (backRefIndex > numCapturingGroups) {
                final StringBuilder sb = new StringBuilder(value.length() + 1);
                final int groupStart = backRefMatcher.start(1);
                sb.append(value.substring(0, groupStart - 1));
                sb.append("\\");
                sb.append(value.substring(groupStart - 1));
                value = sb.toString();
            }
        }
        return value;
    }

    public static void main(String[] args) {
        for (String arg : args) {
            String[] parts = arg.split(" ", -1);
            String pattern = text(parts[0]), replacement = text(parts[1]);
            String flag = text(parts[2]), name = text(parts[3]);
            Matcher m = Pattern.compile(pattern).matcher(name);
            if (!m.matches()) {
                System.out.println("NONE");
                continue;
            }
            String result;
            try {
                result = name.replaceAll(pattern, escapeLiteralBackReferences(replacement, m.groupCount()));
            } catch (RuntimeException e) {
                System.out.println("ERR " + e.toString().replace('\n', ' '));
                continue;
            }
            if (flag.equals("L")) result = result.toLowerCase(Locale.ENGLISH);
            if (flag.equals("U")) result = result.toUpperCase(Locale.ENGLISH);
            StringBuilder out = new StringBuilder();
            for (int i = 0; i < result.length(); i++) out.append(String.format("%04x", (int) result.charAt(i)));
            System.out.println("OK " + out);
        }
    }
}
