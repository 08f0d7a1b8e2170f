package scaleout;

import java.util.function.Consumer;

/** floe's word rule: a maximal run of alphanumeric characters, lowercased. */
final class Words {
    private Words() {}

    static void each(String line, Consumer<String> out) {
        int n = line.length();
        int i = 0;
        while (i < n) {
            while (i < n && !Character.isLetterOrDigit(line.charAt(i))) i++;
            int start = i;
            while (i < n && Character.isLetterOrDigit(line.charAt(i))) i++;
            if (i > start) out.accept(line.substring(start, i).toLowerCase());
        }
    }
}
