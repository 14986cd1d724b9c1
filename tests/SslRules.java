// How Kafka's SslPrincipalMapper applies one rule to a distinguished name: its Rule.apply,
// Java's regular expressions (Pattern.matcher(name).matches(), then name.replaceAll) and
// toLowerCase/toUpperCase(Locale.ENGLISH). Each argument is "pattern replacement case name",
// each part the hex of its UTF-8 (case: "", "L" or "U"); for each, "OK <UTF-16 code units of
// the result, in hex>" or "NONE" where the rule does not match.
// Run as `java SslRules.java ...` (tests/unit/test_principal_mapping.py).
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.Locale;
import java.util.regex.Pattern;

public class SslRules {
    static String text(String hex) {
        return new String(HexFormat.of().parseHex(hex), StandardCharsets.UTF_8);
    }

    public static void main(String[] args) {
        for (String arg : args) {
            String[] parts = arg.split(" ", -1);
            String pattern = text(parts[0]), replacement = text(parts[1]);
            String flag = text(parts[2]), name = text(parts[3]);
            if (!Pattern.compile(pattern).matcher(name).matches()) {
                System.out.println("NONE");
                continue;
            }
            String result = name.replaceAll(pattern, replacement);
            if (flag.equals("L")) result = result.toLowerCase(Locale.ENGLISH);
            if (flag.equals("U")) result = result.toUpperCase(Locale.ENGLISH);
            StringBuilder out = new StringBuilder();
            for (int i = 0; i < result.length(); i++) out.append(String.format("%04x", (int) result.charAt(i)));
            System.out.println("OK " + out);
        }
    }
}
