// For each certificate file given: how Kafka's broker names its subject, as
// "OK <UTF-16 code units of the name, in hex>", or "ERR <why>" where Java refuses the
// certificate. The name is SSLSession.getPeerPrincipal().getName() as Kafka's
// DefaultKafkaPrincipalBuilder reads it: the certificate's getSubjectX500Principal().getName()
// (RFC 2253). Where new X500Principal(getEncoded()).getName() differs (Java sorts the values
// of a multi-valued RDN when it encodes them again) " REREAD <hex>" follows.
// Run as `java X500Names.java a.pem b.pem ...` (tests/x509.py).
import java.io.FileInputStream;
import java.io.InputStream;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import javax.security.auth.x500.X500Principal;

public class X500Names {
    static String hex(String name) {
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < name.length(); i++) {
            out.append(String.format("%04x", (int) name.charAt(i)));
        }
        return out.toString();
    }

    public static void main(String[] args) throws Exception {
        CertificateFactory factory = CertificateFactory.getInstance("X.509");
        for (String path : args) {
            try (InputStream in = new FileInputStream(path)) {
                X509Certificate cert = (X509Certificate) factory.generateCertificate(in);
                X500Principal subject = cert.getSubjectX500Principal();
                String name = subject.getName();
                String again = new X500Principal(subject.getEncoded()).getName();
                System.out.println("OK " + hex(name) + (name.equals(again) ? "" : " REREAD " + hex(again)));
            } catch (Exception e) {
                System.out.println("ERR " + e.toString().replace('\n', ' '));
            }
        }
    }
}
